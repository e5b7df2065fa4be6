from dealbroker.cli import main

main()
