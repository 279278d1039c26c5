"""The process: its composition root (``main``) and its lifecycle under kopf (``lifecycle``)."""
