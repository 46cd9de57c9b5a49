"""The CPU schedule layer shared by every CPU backend (registered for the target key ``cpu``)."""
