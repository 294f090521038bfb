"""HTTP routes: parse the request, hand it to a worker, shape the response. No array logic."""
