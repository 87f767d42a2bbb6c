"""Cloud node-pool providers behind one narrow protocol."""
