"""What to build, decided before anything is built: the matrix file expanded into cells
(matrix, selection), the build workflow's jobs of those cells (github_jobs), variant names
(variants), CUDA capabilities per cell (capabilities), which torch releases and CUDA builds
exist upstream (upstream, torch_cuda), the toolchain a native build would use, probed once
into a frozen value (toolchain), and how much to run at once (resources)."""
