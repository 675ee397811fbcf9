from dprelease.cli import main

main()
