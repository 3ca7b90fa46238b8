from flows.cli import main

main()
