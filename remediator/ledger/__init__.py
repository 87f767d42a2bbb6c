"""The hardware ledger (issue #28): GPUs by UUID and machines by instance id or DMI serial,
followed across node names, replacements and clusters. Sits beside store/ (over its own tables);
remediation/, web/ and controller/ ask it through `Ledger`, never by joining its tables."""
