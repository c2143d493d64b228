"""The REST API (/api/v1/): tasks and their actions, tokens (views), approvals, destinations,
their serializers and filters, and the routes (urls). Audit's views are audit.api; what every
REST view builds on (authentication, permissions, problem errors, pagination) is
mcptasks.restkit."""
