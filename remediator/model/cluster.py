"""A cluster's name: the value of every table's `cluster` column and of `cluster_name`.

Kubernetes names objects in DNS-1123 form; a cluster name kept to the same rules is safe in a
URL, a label, a file name and a metric label, and it must fit the database's column.
"""

from __future__ import annotations

import re

# The width of every `cluster` column (store/models.py).
NAME_MAX = 128
# A DNS-1123 subdomain: lowercase alphanumerics, '-' and '.', starting and ending alphanumeric.
_DNS_1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def name_problem(name: str) -> str | None:
    """Why `name` cannot be a cluster's name, or None when it can."""
    if len(name) > NAME_MAX:
        return f"cluster name is {len(name)} characters; at most {NAME_MAX} fit the database"
    if not _DNS_1123.match(name):
        return (
            f"cluster name {name!r} is not a DNS-1123 name: lowercase letters, digits, '-' and "
            "'.', starting and ending with a letter or digit"
        )
    return None
