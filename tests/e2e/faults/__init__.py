"""Fault injection on the real test bed: crashes, restarts, watch gaps, races, bad input, security.

See docs/faults.md; ``bench/faults`` runs the full-size variant (``FAULTS_PROFILE=full``).
"""
