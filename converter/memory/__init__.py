"""Memory: each rank's peak over the traced step, what holds it, and the memory of a what-if.

``kineto.py`` (Kineto's ``[memory]`` events) and ``host.py`` (the host trace's tensors) read the
traces; ``profile.py`` makes one rank's memory of them and its sidecar file; ``job.py`` a job's;
``whatif.py`` a scaled job's; ``fit.py`` checks peaks against an accelerator; ``plot.py`` draws
the timeline (docs/memory.md)."""
