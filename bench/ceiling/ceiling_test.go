package ceiling

import (
	"context"
	"errors"
	"testing"
	"time"
)

// small bounds every measurement tightly: these tests check that each
// measurement runs and counts sensibly, never how fast it is.
var small = Options{
	PingPongCount: 200,
	DatagramCount: 2000,
	GSOSendCount:  64,
	Duration:      200 * time.Millisecond,
}

func TestPingPong(t *testing.T) {
	p, err := MeasurePingPong(context.Background(), small)
	if err != nil {
		t.Fatal(err)
	}
	if p.Count == 0 || p.Count > small.PingPongCount {
		t.Errorf("Count = %d, want 1..%d", p.Count, small.PingPongCount)
	}
	if p.Size != 64 {
		t.Errorf("Size = %d, want 64", p.Size)
	}
	if !(0 < p.Min && p.Min <= p.Median && p.Median <= p.P99) {
		t.Errorf("min %v, median %v, p99 %v not ordered and positive", p.Min, p.Median, p.P99)
	}
}

func TestDatagramRate(t *testing.T) {
	r, err := MeasureDatagramRate(context.Background(), small)
	if err != nil {
		t.Fatal(err)
	}
	if r.Size != 4096 || r.Batch != 64 {
		t.Errorf("Size, Batch = %d, %d, want 4096, 64", r.Size, r.Batch)
	}
	if r.Datagrams <= 0 || r.Datagrams > r.SentDatagrams {
		t.Errorf("received %d of %d sent datagrams", r.Datagrams, r.SentDatagrams)
	}
	if r.Bytes != r.Datagrams*4096 {
		t.Errorf("received %d bytes in %d datagrams of 4096", r.Bytes, r.Datagrams)
	}
	if r.PerSecond <= 0 || r.GBps <= 0 {
		t.Errorf("PerSecond %v, GBps %v, want > 0", r.PerSecond, r.GBps)
	}
	if l := r.Loss(); l < 0 || l >= 1 {
		t.Errorf("Loss() = %v, want in [0, 1)", l)
	}
}

func TestGSO(t *testing.T) {
	r, err := MeasureGSO(context.Background(), small)
	if errors.Is(err, ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if r.Bytes <= 0 || r.Bytes > r.SentBytes {
		t.Errorf("received %d of %d sent bytes", r.Bytes, r.SentBytes)
	}
	if r.Size != 4096 {
		t.Errorf("segment size %d, want 4096", r.Size)
	}
}

func TestMeasureCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Measure(ctx, small); !errors.Is(err, context.Canceled) {
		t.Errorf("Measure on a canceled context: %v, want context.Canceled", err)
	}
}

func TestDefaults(t *testing.T) {
	o := Options{}.withDefaults()
	if o.GSOSegment*o.GSOSegments > maxUDPPayload {
		t.Errorf("GSO buffer %d × %d exceeds %d", o.GSOSegments, o.GSOSegment, maxUDPPayload)
	}
	if o.GSOSegments != 15 {
		t.Errorf("GSOSegments = %d, want 15 for 4096-byte segments", o.GSOSegments)
	}
	o = Options{GSOSegment: 1400, GSOSegments: 100}.withDefaults()
	if o.GSOSegments != maxUDPPayload/1400 {
		t.Errorf("GSOSegments = %d, want it capped at %d", o.GSOSegments, maxUDPPayload/1400)
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i))
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{50, 50}, {99, 99}, {100, 100}, {0.1, 1}} {
		if got := percentile(d, tc.q); got != tc.want {
			t.Errorf("percentile(1..100, %v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("percentile(nil) = %v, want 0", got)
	}
}

// BenchmarkPingPong reports the round-trip time per op and the median.
func BenchmarkPingPong(b *testing.B) {
	p, err := MeasurePingPong(context.Background(), Options{PingPongCount: b.N, Duration: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(p.Median.Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(p.P99.Nanoseconds()), "p99-ns")
}

// BenchmarkDatagramRate sends b.N 4 KiB datagrams; the metrics are counted
// at the receiver.
func BenchmarkDatagramRate(b *testing.B) {
	b.SetBytes(4096)
	r, err := MeasureDatagramRate(context.Background(), Options{DatagramCount: b.N, Duration: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(r.PerSecond, "rx-datagrams/s")
	b.ReportMetric(r.GBps, "rx-GB/s")
	b.ReportMetric(r.Loss()*100, "loss-%")
}

// BenchmarkGSO sends b.N GSO buffers (15 × 4096 bytes each) to a UDP_GRO
// receiver.
func BenchmarkGSO(b *testing.B) {
	b.SetBytes(15 * 4096)
	r, err := MeasureGSO(context.Background(), Options{GSOSendCount: b.N, Duration: time.Minute})
	if errors.Is(err, ErrUnsupported) {
		b.Skip(err)
	}
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(r.GBps, "rx-GB/s")
	b.ReportMetric(r.Loss()*100, "loss-%")
}
