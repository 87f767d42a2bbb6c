"""The only package that imports `kubernetes`: a typed wrapper with our own errors."""
