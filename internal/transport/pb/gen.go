// Package pb holds the generated protocol buffer and gRPC code for the
// Neptune wire protocol defined in neptune.proto.
package pb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative neptune.proto
