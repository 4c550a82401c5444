"""Master/slave replication: the HA link (codec, master service, slave client) and epoch checks.

See docs/ARCHITECTURE.md ("Replication") for the design; each module's docstring says its part.
"""
