from tests.protocol.conftest import mcp, mcp_for  # noqa: F401
