"""Running a job's ``.et`` files in ASTRA-sim and reading the result: configs, the run, its logs, the
timeline, sweeps over the number of ranks."""
