from agentbox.cli import main

main()
