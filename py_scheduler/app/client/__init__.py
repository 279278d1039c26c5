"""The API client side: transport and wire encoding, credentials, reflectors and informers, listers, the Lease."""
