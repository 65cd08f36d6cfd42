"""Between the command line and the stages, the only place that composes a plan, its build
and its checks (tests/project/test_package_layout.py keeps it so): native.py, one native build,
which the container worker runs too; cells.py, the selected cells of every kernel (compiled ones
in their containers, Python-only ones natively), each with its outcome; rebuild.py, verify's
rebuild of a variant as it was built; test_variant.py, a test job (the cell's environment and
the suite in it)."""
