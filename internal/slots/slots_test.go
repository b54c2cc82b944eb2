package slots

import "testing"

func TestPickPhase(t *testing.T) {
	for _, tc := range []struct {
		width int
		taken []Slot
		want  int
	}{
		{30, nil, 0},
		{70, []Slot{{0, 30}}, 30},
		{25, []Slot{{0, 25}, {25, 25}, {50, 25}}, 75},
		{50, []Slot{{0, 50}, {50, 50}}, 0},  // full: equal overlap, earliest
		{40, []Slot{{0, 50}, {50, 20}}, 70}, // fits in 70..99 without overlap... 30 free: least overlap
		{20, []Slot{{10, 30}}, 40},          // 0..19 overlaps 10, 40..59 none
		{10, []Slot{{95, 10}}, 5},           // a slot that wraps round
		{99, []Slot{{0, 1}}, 1},             // the rest of the circle
	} {
		if got := Pick(tc.width, tc.taken); got != tc.want {
			t.Errorf("Pick(%d, %v) = %d, want %d", tc.width, tc.taken, got, tc.want)
		}
	}
}

func TestOverlap(t *testing.T) {
	for _, tc := range []struct {
		a, b Slot
		want int
	}{
		{Slot{0, 30}, Slot{30, 70}, 0},
		{Slot{0, 50}, Slot{25, 50}, 25},
		{Slot{90, 20}, Slot{0, 5}, 5},
		{Slot{0, 100}, Slot{40, 10}, 10},
	} {
		if got := Overlap(tc.a, tc.b); got != tc.want {
			t.Errorf("Overlap(%v, %v) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
