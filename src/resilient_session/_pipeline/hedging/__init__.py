"""Hedged tries within the retry budget (docs/configuration.md, "hedging"): the race of one
call's tries, the timer and workers that send its hedges, the racing stages and the chains
built from them, and the call stage that runs a call as a race when its host hedges. Built
into the call chain only when a host of the config hedges."""
