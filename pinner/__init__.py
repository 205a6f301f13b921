"""The static pinner: its C sources (``native/``) and their build (``build.py``), nothing else."""
