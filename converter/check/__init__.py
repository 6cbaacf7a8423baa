"""Reading .et files back (ours or anyone's) and checking them against what ASTRA-sim accepts."""
