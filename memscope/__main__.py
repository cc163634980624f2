from memscope.cli import main

main()
