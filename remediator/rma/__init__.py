"""RMA hand-off (issue #28): a case per GPU or machine sent back to its vendor, its evidence
bundle, its webhook delivery and its forward-only status."""
