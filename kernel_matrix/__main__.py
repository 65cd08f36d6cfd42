from kernel_matrix.cli import main

main()
