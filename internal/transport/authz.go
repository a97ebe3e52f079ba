package transport

import (
	"context"
	"fmt"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/neptune-cluster/neptune/internal/pki"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// Rule says who may call one gRPC method: the roles whose certificates
// are accepted and, for methods whose messages speak for a node, a check
// of every request message against the caller's identity.
type Rule struct {
	Roles []pki.Role
	// Check, if set, vets each request message; an error refuses it.
	Check func(caller pki.Identity, msg any) error
}

var (
	callers           = []pki.Role{pki.RoleClient, pki.RoleNode, pki.RoleOperator, pki.RoleGateway}
	anyMember         = []pki.Role{pki.RoleClient, pki.RoleNode, pki.RoleOperator}
	nodesOnly         = []pki.Role{pki.RoleNode}
	operatorOnly      = []pki.Role{pki.RoleOperator}
	operatorsAndNodes = []pki.Role{pki.RoleOperator, pki.RoleNode}
)

// Rules is the authorisation table: every method of the Node service and
// who may call it. A method missing from it is refused to everyone, so a
// method added to the service is closed until a rule opens it.
//
//   - Call, BidiStream: any member and gateways. Clients call; nodes
//     forward writes to the primary; operators use the same client;
//     gateways call and open streams for their subscribers (a write
//     stream's messages are writes like a Call's, with the same identity
//     rules, so whoever may call may send them).
//
//   - Stream, Aggregate, AggregateStream: any member but gateways (a gateway carries
//     bidirectional streams only, and runs no aggregation). A blocking aggregation
//     (AggregateRequest.blocking, the NoED experiment's baseline, which
//     holds a worker on every node of the tree for the whole call) only
//     from operators, and from nodes forwarding a subtree of one.
//
//   - Replicate: nodes only, and the batch and every message in it must
//     come from the node id the caller's certificate names, so a node
//     speaks only for its own replicas.
//
//   - InstallSnapshot: nodes only, every chunk from the caller's node
//     (as Replicate).
//
//   - Promote: operators only. No node calls Promote (the replication
//     runtime elects primaries over Replicate, and placement moves a
//     primary by a priority change through ChangeReplicas).
//
//   - ChangeReplicas: operators, and nodes: the node acting for
//     placement (internal/rebalance) replaces dead nodes' replicas and
//     evens out replicas and primaries with the operator's call. A node
//     may already replicate any partition it hosts; this lets it change
//     where they live, which a node trusted with the data may.
//
//   - Drain: operators only (`neptune node drain`).
//
//   - Backup, Debug: operators only (`neptune backup`, `neptune debug
//     zip`): a backup is every byte of a partition's state, a debug
//     bundle the node's config, logs and profiles.
//
//   - grpc.health.v1 Check and Watch: whoever may call.
//
// Future configuration changes (keyring, membership) belong with Promote.
var Rules = map[string]Rule{
	pb.Node_Call_FullMethodName:            {Roles: callers},
	pb.Node_Stream_FullMethodName:          {Roles: anyMember},
	pb.Node_Aggregate_FullMethodName:       {Roles: anyMember, Check: blockingFromOperator},
	pb.Node_AggregateStream_FullMethodName: {Roles: anyMember, Check: blockingFromOperator},
	pb.Node_Replicate_FullMethodName:       {Roles: nodesOnly, Check: replicateFromCaller},
	pb.Node_Promote_FullMethodName:         {Roles: operatorOnly},
	pb.Node_InstallSnapshot_FullMethodName: {Roles: nodesOnly, Check: snapshotFromCaller},
	pb.Node_ChangeReplicas_FullMethodName:  {Roles: operatorsAndNodes},
	pb.Node_Drain_FullMethodName:           {Roles: operatorOnly},
	pb.Node_BidiStream_FullMethodName:      {Roles: callers},
	pb.Node_Backup_FullMethodName:          {Roles: operatorOnly},
	pb.Node_Debug_FullMethodName:           {Roles: operatorOnly},
	// grpc.health.v1: whoever may call may ask whether to.
	healthpb.Health_Check_FullMethodName: {Roles: callers},
	healthpb.Health_Watch_FullMethodName: {Roles: callers},
}

// blockingFromOperator refuses a blocking aggregation from a client: it
// ties up a worker of every node in the tree for as long as the call
// lasts, a baseline for experiments rather than a way to call. Operators
// run experiments; nodes forward the subtrees of a call their root
// admitted.
func blockingFromOperator(caller pki.Identity, msg any) error {
	r, ok := msg.(*pb.AggregateRequest)
	if !ok {
		return fmt.Errorf("unexpected message %T", msg)
	}
	if r.Blocking && caller.Role != pki.RoleOperator && caller.Role != pki.RoleNode {
		return fmt.Errorf("a blocking aggregation (an experiment's baseline) needs an operator certificate, not %s", caller)
	}
	return nil
}

// snapshotFromCaller refuses a snapshot chunk that claims to come from a
// node other than the caller: like Replicate, a node streams snapshots
// only of its own replicas (the runtime also checks that the sender is a
// replica of the partition and the recipient's primary).
func snapshotFromCaller(caller pki.Identity, msg any) error {
	c, ok := msg.(*pb.SnapshotChunk)
	if !ok {
		return fmt.Errorf("unexpected message %T", msg)
	}
	if c.From != caller.Name {
		return fmt.Errorf("snapshot chunk of %s/%d from %q sent by node %q", c.Service, c.Partition, c.From, caller.Name)
	}
	return nil
}

// replicateFromCaller refuses a replication batch that claims to come from
// a node other than the caller, or carries a message that does.
func replicateFromCaller(caller pki.Identity, msg any) error {
	b, ok := msg.(*pb.ReplicaBatch)
	if !ok {
		return fmt.Errorf("unexpected message %T", msg)
	}
	if b.From != caller.Name {
		return fmt.Errorf("batch from %q sent by node %q", b.From, caller.Name)
	}
	for _, m := range b.Messages {
		if m.From != caller.Name {
			return fmt.Errorf("message of %s/%d from %q sent by node %q", m.Service, m.Partition, m.From, caller.Name)
		}
	}
	return nil
}

type callerKey struct{}

// Caller is the verified identity of the peer that made the call ctx
// belongs to, when the server runs with mutual TLS.
func Caller(ctx context.Context) (pki.Identity, bool) {
	id, ok := ctx.Value(callerKey{}).(pki.Identity)
	return id, ok
}

// PeerIdentity reads the identity from the verified client certificate of
// the gRPC connection ctx came in on.
func PeerIdentity(ctx context.Context) (pki.Identity, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return pki.Identity{}, fmt.Errorf("%w: no peer", pki.ErrUnverified)
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return pki.Identity{}, fmt.Errorf("%w: not a TLS connection", pki.ErrUnverified)
	}
	return pki.PeerIdentity(info.State)
}

// authorize finds the rule for method and checks the caller against its
// roles. It returns gRPC status errors: Unauthenticated without a usable
// certificate, PermissionDenied for a role the rule does not admit.
func authorize(ctx context.Context, rules map[string]Rule, method string) (pki.Identity, Rule, error) {
	id, err := PeerIdentity(ctx)
	if err != nil {
		return pki.Identity{}, Rule{}, status.Error(codes.Unauthenticated, err.Error())
	}
	rule, ok := rules[method]
	if !ok {
		return id, Rule{}, status.Errorf(codes.PermissionDenied, "%s: no authorisation rule admits %s", method, id)
	}
	if !slices.Contains(rule.Roles, id.Role) {
		return id, Rule{}, status.Errorf(codes.PermissionDenied, "%s: role %s may not call it (%s)", method, id.Role, id)
	}
	return id, rule, nil
}

func check(rule Rule, id pki.Identity, method string, msg any) error {
	if rule.Check == nil {
		return nil
	}
	if err := rule.Check(id, msg); err != nil {
		return status.Errorf(codes.PermissionDenied, "%s: %v", method, err)
	}
	return nil
}

// refused reports a refused call to r (nil: nobody): the caller's
// certificate identity, or its address if it has none.
func refused(r Refuser, ctx context.Context, reason string, id pki.Identity, err error) {
	if r == nil {
		return
	}
	source := id.String()
	if id.Name == "" {
		source = "?"
		if p, ok := peer.FromContext(ctx); ok {
			source = hostOf(p.Addr)
		}
	}
	r.Refuse(reason, source, err)
}

// authzReason is the refusal reason of an authorize error.
func authzReason(err error) string {
	if status.Code(err) == codes.Unauthenticated {
		return "grpc_unauthenticated"
	}
	return "grpc_role"
}

// UnaryAuthorizer enforces rules on unary calls, reporting each refusal
// to refusals (nil: nobody). The handler's context carries the caller
// (see Caller).
func UnaryAuthorizer(rules map[string]Rule, refusals Refuser) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		id, rule, err := authorize(ctx, rules, info.FullMethod)
		if err != nil {
			refused(refusals, ctx, authzReason(err), id, err)
			return nil, err
		}
		if err := check(rule, id, info.FullMethod, req); err != nil {
			refused(refusals, ctx, "grpc_claim", id, err)
			return nil, err
		}
		return handler(context.WithValue(ctx, callerKey{}, id), req)
	}
}

// StreamAuthorizer enforces rules on streaming calls, checking every
// message the client sends and reporting each refusal to refusals (nil:
// nobody).
func StreamAuthorizer(rules map[string]Rule, refusals Refuser) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		id, rule, err := authorize(ss.Context(), rules, info.FullMethod)
		if err != nil {
			refused(refusals, ss.Context(), authzReason(err), id, err)
			return err
		}
		return handler(srv, &authorizedStream{ServerStream: ss, ctx: context.WithValue(ss.Context(), callerKey{}, id), id: id, rule: rule,
			method: info.FullMethod, refusals: refusals})
	}
}

type authorizedStream struct {
	grpc.ServerStream
	ctx      context.Context
	id       pki.Identity
	rule     Rule
	method   string
	refusals Refuser
}

func (s *authorizedStream) Context() context.Context { return s.ctx }

func (s *authorizedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	err := check(s.rule, s.id, s.method, m)
	if err != nil {
		refused(s.refusals, s.ctx, "grpc_claim", s.id, err)
	}
	return err
}
