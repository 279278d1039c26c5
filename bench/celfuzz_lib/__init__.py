"""Differential fuzzer for DRA CEL device selectors (``bench/celfuzz``): random selectors
(``generator``) run through upstream's framework and py-scheduler, compared and summarized
(``runner``)."""
