"""The operator's web console (``dataq web``): pages and a JSON API over every configured queue."""
