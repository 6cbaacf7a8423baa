"""Many ranks: one rank's pair linked and converted, every rank of a directory in parallel."""
