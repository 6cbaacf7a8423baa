"""The job on disk: its rank files (``files``) and what each records of the job (``metadata``)."""
