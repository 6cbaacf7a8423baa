"""Linking a host trace with its Kineto trace: host index + device events -> link plan -> merged nodes."""
