package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"connectrpc.com/connect"
	_ "connectrpc.com/grpchealth" // registers grpc.health.v1's messages, looked up below
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/coordkit/coordkit/libs/client"
)

// healthCheckProcedure is the gRPC health check every coordkit server answers.
const healthCheckProcedure = "/grpc.health.v1.Health/Check"

// errNotServing is the answer of a service that is not serving (exit 1).
var errNotServing = errors.New("not serving")

// healthPackages are where grpc.health.v1's messages may be registered: under their own
// name when google.golang.org/grpc is linked in, and under connectext's by
// connectrpc.com/grpchealth, which the server uses (same messages and wire format, renamed so
// that both can be linked together).
var healthPackages = []protoreflect.FullName{"grpc.health.v1", "connectext.grpc.health.v1"}

// healthMessages are grpc.health.v1's request and response types, from the descriptors a
// well-kept module registers, so the CLI needs no generated code of its own.
func healthMessages() (req, res protoreflect.MessageType, err error) {
	for _, pkg := range healthPackages {
		req, err = protoregistry.GlobalTypes.FindMessageByName(pkg + ".HealthCheckRequest")
		if err != nil {
			continue
		}
		if res, err = protoregistry.GlobalTypes.FindMessageByName(pkg + ".HealthCheckResponse"); err == nil {
			return req, res, nil
		}
	}
	return nil, nil, fmt.Errorf("health: grpc.health.v1 messages not linked in: %w", err)
}

func newHealthCmd() *cobra.Command {
	cf := &clientFlags{}
	var service string
	c := &cobra.Command{
		Use:   "health",
		Short: "ask a server's gRPC health check; exit 0 when it is serving",
		Long: `Ask the server's grpc.health.v1 Check and print the status. Exits 0 when SERVING, 1 when
NOT_SERVING or the service is unknown, 3 when the server cannot be reached: usable as a
Docker HEALTHCHECK with no shell in the image:

  HEALTHCHECK CMD ["coord", "health", "--server", "http://127.0.0.1:8080"]

--service names one service (coordkit.lock.v1.LockService, coordkit.idgen.v1.IdService,
coordkit.taskpick.v1.TaskPickService); empty asks about the server as a whole.`,
		Args: argsExactly(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := cf.options()
			if err != nil {
				return err
			}
			ctx, cancel := cf.callContext(cmd.Context(), 0)
			defer cancel()
			status, err := checkHealth(ctx, cf.server, service, opts...)
			if err != nil {
				return err
			}
			if cf.asJSON {
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "{\"status\":%q}\n", status)
			} else {
				_, err = fmt.Fprintln(cmd.OutOrStdout(), status)
			}
			if err == nil && status != "SERVING" {
				return fmt.Errorf("%w: %s", errNotServing, status)
			}
			return err
		},
	}
	cf.register(c, "")
	c.Flags().StringVar(&service, "service", "", "the service to ask about; empty: the whole server")
	return c
}

// checkHealth calls grpc.health.v1 Check at baseURL and returns the status name (SERVING,
// NOT_SERVING, SERVICE_UNKNOWN or UNKNOWN, as grpc.health.v1 names them).
func checkHealth(ctx context.Context, baseURL, service string, opts ...client.Option) (string, error) {
	reqType, resType, err := healthMessages()
	if err != nil {
		return "", err
	}
	httpClient, connectOpts := client.Transport(opts...)
	connectOpts = append(connectOpts, connect.WithResponseInitializer(func(_ connect.Spec, msg any) error {
		*msg.(*dynamicpb.Message) = *dynamicpb.NewMessage(resType.Descriptor())
		return nil
	}))
	hc := connect.NewClient[dynamicpb.Message, dynamicpb.Message](httpClient, strings.TrimRight(baseURL, "/")+healthCheckProcedure, connectOpts...)
	req := dynamicpb.NewMessage(reqType.Descriptor())
	req.Set(req.Descriptor().Fields().ByName("service"), protoreflect.ValueOfString(service))
	res, err := hc.CallUnary(ctx, connect.NewRequest(req))
	if err != nil {
		return "", err
	}
	field := res.Msg.Descriptor().Fields().ByName("status")
	num := res.Msg.Get(field).Enum()
	name := fmt.Sprint(int32(num))
	if v := field.Enum().Values().ByNumber(num); v != nil {
		// connectext's copy prefixes the values (SERVING_STATUS_SERVING); print grpc's names.
		name = strings.TrimPrefix(string(v.Name()), "SERVING_STATUS_")
	}
	return name, nil
}
