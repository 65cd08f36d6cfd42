"""Between the command line and the stages: what composes a plan, its build and its checks
for one job (native.py: a native build, which the container worker runs too; test_variant.py: a
test job, the cell's environment and the suite in it)."""
