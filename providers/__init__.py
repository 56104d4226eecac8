"""Dynamic providers: the only deploy-time code that talks to the cluster.

Pickled into the stack's state and imported by the provider host: no import-time side
effects here, and API clients are built inside provider methods.
"""
