package wire

import (
	"context"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	pluginpb "github.com/drainer-io/drainer/dispatch/execplugin/proto"
)

// Handshake values; adapter.proto documents them for plugins not written in Go.
const (
	// MagicCookieKey and MagicCookieValue make a plugin refuse to run when
	// started by anything but drainer, and drainer refuse a go-plugin
	// executable built for another host (Terraform, Vault, ...): the cookie
	// is unique to drainer.
	MagicCookieKey   = "DRAINER_PLUGIN_MAGIC_COOKIE"
	MagicCookieValue = "8d1f4b0e6a3c4f2d9e57b1c0a2f6d843-drainer-adapter"
	// HandshakeVersion is go-plugin's application protocol version.
	HandshakeVersion = 1
	// ProtocolVersion is the version of adapter.proto the plugin reports in
	// InfoResponse.protocol_version.
	ProtocolVersion = 1
	// PluginName is the name the adapter service is dispensed under.
	PluginName = "adapter"
)

// Handshake is the go-plugin handshake shared by drainer and its plugins.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  HandshakeVersion,
	MagicCookieKey:   MagicCookieKey,
	MagicCookieValue: MagicCookieValue,
}

// GRPCPlugin is the go-plugin glue of the adapter service. The plugin side
// sets Impl; the host leaves it nil and dispenses a *Client.
type GRPCPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl pluginpb.AdapterServer
}

var _ plugin.GRPCPlugin = (*GRPCPlugin)(nil)

// GRPCServer registers the adapter service (plugin side).
func (p *GRPCPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	pluginpb.RegisterAdapterServer(s, p.Impl)
	return nil
}

// GRPCClient returns a *Client (host side). ctx is cancelled by go-plugin
// when the plugin process exits.
func (p *GRPCPlugin) GRPCClient(ctx context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &Client{AdapterClient: pluginpb.NewAdapterClient(c), Conn: c, Exited: ctx.Done()}, nil
}

// Client is the host's view of one running plugin process.
type Client struct {
	pluginpb.AdapterClient
	// Conn is the gRPC connection to the plugin.
	Conn *grpc.ClientConn
	// Exited is closed when the plugin process has exited.
	Exited <-chan struct{}
}
