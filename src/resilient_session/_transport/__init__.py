"""Sending a try and reading its body: the watched connection pools, the watchdog that cuts
a try at its deadline, body reads and timeouts."""
