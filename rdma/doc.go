// Package rdma is the verbs-style API that every RDMA provider implements: devices, protection domains, memory regions, completion queues, queue pairs with their state machine, work requests and completions, and the connection manager.
package rdma
