"""What every REST view builds on, the REST API's (mcptasks.api) and audit's (audit.api):
authentication (auth), the one permission class (permissions), problem errors (errors), the
base views and their shared steps (views), pagination and filter fields. It imports neither."""
