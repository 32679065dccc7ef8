"""ACL 1.0 as RocketMQ brokers enforce it (plain_acl.yml accounts, whitelists, HMAC-SHA1 signatures).

Pure modules, no socket and no clock: ``permission`` (DENY / ANY / PUB / SUB), ``address`` (whitelist patterns),
``account`` (one account: a plain_acl.yml entry, the ACL admin requests' body), ``plain_file`` (the plain_acl.yml
model and writer), ``resources`` (what each request code needs), ``decision`` (the rule), ``peers`` (the address
allow-list of the HA port and the controller), ``refusal_log`` (how often a refusal is logged), ``credentials_file``
(one account in RocketMQ's tools.yml layout: a broker's own, a replicator cluster's). The broker's side is
``broker.acl_guard`` (reload, enforcement before dispatch) and ``broker.acl_processor`` (admin requests 50-54). The
signature itself is ``protocol.acl``, shared with the client that signs.
"""
