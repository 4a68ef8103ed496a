package session

import (
	"context"
	"strings"
	"testing"

	"github.com/nvmeof/nvmeof/nvme"
)

// TestAdminRefusals checks what OpAdmin refuses before it reaches the
// controller: commands that change anything, malformed SQEs and data
// lengths out of range.
func TestAdminRefusals(t *testing.T) {
	d := &Daemon{} // no controller: a refusal must not need one
	sqe := func(op nvme.AdminOpcode) []byte {
		b := make([]byte, 64)
		b[0] = uint8(op)
		return b
	}
	for _, tc := range []struct {
		name string
		req  Request
		want string
	}{
		{"format", Request{SQE: sqe(nvme.AdminFormatNVM)}, "is not allowed through the control socket"},
		{"set features", Request{SQE: sqe(nvme.AdminSetFeatures)}, "is not allowed"},
		{"namespace attachment", Request{SQE: sqe(nvme.AdminNamespaceAttachment)}, "is not allowed"},
		{"short SQE", Request{SQE: make([]byte, 10)}, "SQE of 10 bytes"},
		{"no SQE", Request{}, "SQE of 0 bytes"},
		{"negative length", Request{SQE: sqe(nvme.AdminGetLogPage), DataLen: -1}, "data length -1"},
		{"huge length", Request{SQE: sqe(nvme.AdminIdentify), DataLen: MaxAdminData + 1}, "out of range"},
	} {
		resp := d.admin(context.Background(), tc.req)
		if !strings.Contains(resp.Error, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, resp.Error, tc.want)
		}
	}
}
