package lockout

import (
	"fmt"

	"github.com/spillwayproxy/spillway/plugin/internal/state"
)

// Active counts the connection's lockouts in force, the entries List would return. A
// connection with none in force (no index, every listed lockout ended, or one recorded
// under a rotated credential) costs one shared-data read and no allocation, so a metrics
// tick can ask it of every connection.
func (t *Tracker) Active(c Conn) (int, error) {
	b, _, found, err := t.store.Get(c.indexKey)
	if err != nil {
		return 0, fmt.Errorf("lockout: read index of %s/%s: %w", c.provider, c.connection, err)
	}
	if !found {
		return 0, nil
	}
	d := state.NewDecoder(b, indexKind, indexVersion)
	if fp, maxUntil := d.Uint(), d.Int(); maxUntil <= t.nowMillis() || !c.sameCredential(fp) {
		return 0, nil
	}
	entries, err := t.List(c)
	return len(entries), err
}
