// Package soft is a RoCEv2 host channel adapter in software over UDP port 4791: RC requester and responder, UD on QP1 with the connection manager agent, memory-region checks, batching and fault injection.
package soft
