from evogan.cli import main

main()
