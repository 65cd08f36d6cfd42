"""What `kernel-matrix init` sets up in a kernel's repository: the kernels it finds
(search.py), the commit of kernel-matrix the workflows pin, checked on GitHub (pin.py),
where the matrix's jobs run and the cells it leaves out (runners.py), the repository's
own state (repository.py) and the files it writes, from templates (files.py)."""
