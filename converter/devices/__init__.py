"""Device profiles (what a device reaches per op class, by shape) and the what-if that uses them."""
