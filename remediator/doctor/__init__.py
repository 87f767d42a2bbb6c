"""`remediator doctor`: will this controller work in this cluster, before the first fault says
otherwise. Every check reads; none writes."""
