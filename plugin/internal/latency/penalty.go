package latency

import (
	"time"

	"github.com/spillwayproxy/spillway/policies"
)

// MilliPoint is the unit of p2c penalties: a thousandth of a point, so the pairwise term
// keeps its fractions in integer arithmetic. One point weighs as much as one in-flight
// request.
const MilliPoint = 1000

// ClampWeight brings a configured p2c latency weight into the guide's range 0..20 (§2).
func ClampWeight(weight int) int {
	return min(max(weight, 0), policies.P2CLatencyWeightMax)
}

// PairTerm returns the penalty, in milli-points, that p2c adds to each candidate of a pair
// (the guide's compareP2CConnections, §2). At most weight points per candidate: half from
// latency as a ratio to the faster of the two (twice as slow or worse takes the whole
// half), half from the rolling error rate. The term applies only when the weight (clamped
// to 0..20) is above 0 and both candidates have at least minSamples samples (the tracker's
// MinSamples, guide: 3), so
// a new connection is never penalised; otherwise applied is false and both are 0. When
// either side has no timed sample (every attempt failed before a first byte), the latency
// half is 0 for both and the error half still applies.
func PairTerm(weight, minSamples int, a, b Stats) (penaltyA, penaltyB int64, applied bool) {
	weight = ClampWeight(weight)
	if weight == 0 || a.Samples < minSamples || b.Samples < minSamples {
		return 0, 0, false
	}
	half := int64(weight) * MilliPoint / 2
	penaltyA = errorPart(half, a)
	penaltyB = errorPart(half, b)
	if a.Timed > 0 && b.Timed > 0 {
		fastest := min(a.MeanTTFB, b.MeanTTFB)
		penaltyA += latencyPart(half, a.MeanTTFB, fastest)
		penaltyB += latencyPart(half, b.MeanTTFB, fastest)
	}
	return penaltyA, penaltyB, true
}

func errorPart(half int64, s Stats) int64 {
	return half * int64(s.Failures) / int64(s.Samples)
}

// latencyPart is half × min(mean/fastest − 1, 1), in whole microseconds.
func latencyPart(half int64, mean, fastest time.Duration) int64 {
	fastUs := max(int64(fastest/time.Microsecond), 1)
	meanUs := max(int64(mean/time.Microsecond), fastUs)
	return half * min(meanUs-fastUs, fastUs) / fastUs
}
