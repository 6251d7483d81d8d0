"""`python -m churn_assets` runs the `churnbench` command line."""

from churn_assets.cli import main

main()
