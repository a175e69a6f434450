"""The request path: the frozen values of a call, classification, backoff, the stages and
the driver that runs them."""
