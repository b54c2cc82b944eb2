package top

import (
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/vgpu-dev/vgpu/internal/status"
)

// Refresh is how often the live view reads the state directory again.
const Refresh = time.Second

// Model is the live view (bubbletea): it reads a report every Refresh,
// measures compute shares between two readings as vgpu status does, and
// redraws; keys sort and pick a GPU.
type Model struct {
	collect func() *status.Report
	every   time.Duration
	report  *status.Report
	view    View
	quit    bool
}

// reportMsg carries a fresh report.
type reportMsg struct{ r *status.Report }

// tickMsg asks for the next reading.
type tickMsg struct{}

// NewModel makes the live view over collect (status.Collect of the state
// directory, or a test's).
func NewModel(collect func() *status.Report, v View) *Model {
	return &Model{collect: collect, every: Refresh, view: v}
}

// Report is the report shown now (nil before the first reading).
func (m *Model) Report() *status.Report { return m.report }

// Current is how the frame is drawn now (sort, GPU).
func (m *Model) Current() View { return m.view }

func (m *Model) read() tea.Msg { return reportMsg{m.collect()} }

// Init reads the state directory at once.
func (m *Model) Init() tea.Cmd { return m.read }

// Update handles a reading, the clock and the keys.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case reportMsg:
		if m.report != nil && msg.r != nil {
			status.MeasureShares(m.report, msg.r)
		}
		m.report = msg.r
		return m, tea.Tick(m.every, func(time.Time) tea.Msg { return tickMsg{} })
	case tickMsg:
		return m, m.read
	case tea.KeyPressMsg:
		switch msg.String() {
		case "q", "ctrl+c", "esc":
			m.quit = true
			return m, tea.Quit
		case "s":
			m.view.Sort = (m.view.Sort + 1) % sortKeys
		case "g":
			m.view.GPU = m.nextGPU()
		case "a":
			m.view.GPU = ""
		}
	}
	return m, nil
}

// nextGPU is the GPU after the one shown (all GPUs after the last one).
func (m *Model) nextGPU() string {
	if m.report == nil {
		return ""
	}
	gs := GPUs(m.report)
	if m.view.GPU == "" {
		if len(gs) == 0 {
			return ""
		}
		return gs[0]
	}
	for i, g := range gs {
		if g == m.view.GPU && i+1 < len(gs) {
			return gs[i+1]
		}
	}
	return ""
}

// View draws the current frame on the alternate screen.
func (m *Model) View() tea.View {
	var s string
	switch {
	case m.quit:
		s = ""
	case m.report == nil:
		s = "vgpu top: reading the state directory…\n"
	default:
		s = Frame(m.report, m.view)
	}
	v := tea.NewView(s)
	v.AltScreen = true
	return v
}
