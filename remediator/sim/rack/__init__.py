"""Rack-scale systems in the simulator: NVL72 racks' layout and their NVLink fabric."""
