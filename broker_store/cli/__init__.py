"""The command line, ``python -m broker_store ...``: ``main`` (the parser, the server commands and the small
mqadmin-style ones), ``ha`` (ha-status, controller-status, elect, controller-config), ``acl`` (ACL 1.0 accounts),
and the options and output every admin command shares: ``tls``, ``credentials``, ``table``.

Nothing is imported here, so a caller of one part (``jobs.dr`` prints with ``table``) loads only that part.
"""
