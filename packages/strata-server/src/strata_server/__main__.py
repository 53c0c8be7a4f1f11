"""`python -m strata_server`: the same as the `strata-server` command."""

from strata_server.cli import main

if __name__ == "__main__":
    main()
