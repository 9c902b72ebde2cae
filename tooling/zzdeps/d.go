package zzdeps

import (
	_ "github.com/Shopify/toxiproxy/v2"
	_ "github.com/Shopify/toxiproxy/v2/client"
	_ "github.com/getkin/kin-openapi/openapi3"
	_ "github.com/modelcontextprotocol/go-sdk/mcp"
)
