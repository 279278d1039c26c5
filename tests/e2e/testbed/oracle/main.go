// Command oracle runs upstream kube-scheduler's own framework and default
// plugins (k8s.io/kubernetes v1.37.2, pinned by this module) on a cluster
// read from a JSON file, and prints what each pending Pod would get: feasible
// nodes, filter reasons, every plugin's normalized score, totals, the
// FailedScheduling message. bench/parity compares it with py-scheduler explain.
//
// Input (stdin): {"objects": [<Kubernetes objects with apiVersion/kind>]}.
// Pods with spec.nodeName are bound; the others are scheduled in the given
// queue order (priority, then creationTimestamp), each assumed on its selected node (ties: smallest node name) before
// the next. Output: one JSON object per pending Pod (JSON Lines).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clientscheme "k8s.io/client-go/kubernetes/scheme"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	"k8s.io/dynamic-resource-allocation/deviceclass/extendedresourcecache"
	resourceslicetracker "k8s.io/dynamic-resource-allocation/resourceslice/tracker"
	"k8s.io/klog/v2"
	configv1 "k8s.io/kube-scheduler/config/v1"
	fwk "k8s.io/kube-scheduler/framework"
	schedulerapi "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/nodevolumelimits"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
	"k8s.io/kubernetes/pkg/scheduler/profile"
	"k8s.io/kubernetes/pkg/scheduler/util/assumecache"
)

type result struct {
	Pod      string                    `json:"pod"`
	Feasible []string                  `json:"feasible"`
	Filtered map[string][]string       `json:"filtered"`
	Scores   map[string]map[string]int `json:"scores"`
	Weights  map[string]int            `json:"weights"`
	Totals   map[string]int64          `json:"totals"`
	Selected *string                   `json:"selected"`
	Message  *string                   `json:"message"`
	// Nominated is the node DefaultPreemption nominated (victims evicted
	// there), when the Pod fits nowhere but preemption helps.
	Nominated *string `json:"nominated,omitempty"`
	// Victims are the Pods that preemption deleted for this Pod (namespace/name,
	// sorted; Pods already terminating or deleted earlier are not deleted again).
	Victims []string `json:"victims,omitempty"`
}

// deleted records the Pods deleted through the fake client (preemption victims).
var (
	deletedMu sync.Mutex
	deleted   []string
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "oracle:", err)
		os.Exit(1)
	}
}

func run() error {
	klog.SetOutput(os.Stderr)
	var in struct {
		Objects []json.RawMessage `json:"objects"`
	}
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		return err
	}
	var nodes []*v1.Node
	var bound, pending []*v1.Pod
	var others []runtime.Object
	decoder := clientscheme.Codecs.UniversalDeserializer()
	for i, raw := range in.Objects {
		obj, _, err := decoder.Decode(raw, nil, nil)
		if err != nil {
			return fmt.Errorf("object %d: %w", i, err)
		}
		switch o := obj.(type) {
		case *v1.Node:
			nodes = append(nodes, o)
		case *v1.Pod:
			if o.Spec.NodeName != "" {
				bound = append(bound, o)
			} else {
				pending = append(pending, o)
			}
		default:
			others = append(others, obj)
		}
	}
	// Queue order, as PrioritySort: higher priority first, then older first.
	sort.SliceStable(pending, func(i, j int) bool {
		pi, pj := podPriority(pending[i]), podPriority(pending[j])
		if pi != pj {
			return pi > pj
		}
		return pending[i].CreationTimestamp.Before(&pending[j].CreationTimestamp)
	})
	seed := append([]runtime.Object{}, others...)
	for _, n := range nodes {
		seed = append(seed, n)
	}
	for _, p := range bound {
		seed = append(seed, p)
	}
	// Pending pods too: DefaultPreemption re-reads the preemptor through the client.
	for _, p := range pending {
		seed = append(seed, p)
	}

	metrics.Register()
	// Evict victims synchronously, so each Pod's victims are known when its line is printed.
	if err := utilfeature.DefaultMutableFeatureGate.Set("SchedulerAsyncPreemption=false"); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logger := klog.FromContext(ctx)
	client := fake.NewSimpleClientset(seed...)
	client.PrependReactor("delete", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if da, ok := action.(k8stesting.DeleteAction); ok {
			deletedMu.Lock()
			deleted = append(deleted, da.GetNamespace()+"/"+da.GetName())
			deletedMu.Unlock()
		}
		return false, nil, nil
	})
	factory := informers.NewSharedInformerFactory(client, 0)

	var versioned configv1.KubeSchedulerConfiguration
	scheme.Scheme.Default(&versioned)
	var cfg schedulerapi.KubeSchedulerConfiguration
	if err := scheme.Scheme.Convert(&versioned, &cfg, nil); err != nil {
		return err
	}
	claimCache := assumecache.NewAssumeCache(logger, factory.Resource().V1().ResourceClaims().Informer(), "ResourceClaim", "", nil)
	tracker, err := resourceslicetracker.StartTracker(ctx, resourceslicetracker.Options{
		SliceInformer: factory.Resource().V1().ResourceSlices(), KubeClient: client,
	})
	if err != nil {
		return err
	}
	draManager := dynamicresources.NewDRAManager(ctx, claimCache, tracker, factory)
	// As kube-scheduler's eventhandlers.go: the DeviceClass informer feeds the
	// extended-resource cache (DRAExtendedResource, GA in 1.37), which
	// NodeResourcesFit and DynamicResources consult for DRA-backed extended resources.
	erCache := draManager.DeviceClassResolver().(*extendedresourcecache.ExtendedResourceCache)
	if _, err := factory.Resource().V1().DeviceClasses().Informer().AddEventHandler(erCache); err != nil {
		return err
	}
	snapshot := internalcache.NewSnapshot(bound, nodes)
	recorder := func(string) events.EventRecorderLogger { return events.NewFakeRecorder(100) }
	profiles, err := profile.NewMap(ctx, cfg.Profiles, plugins.NewInTreeRegistry(), recorder,
		frameworkruntime.WithClientSet(client),
		frameworkruntime.WithPodNominator(noNominations{}),
		frameworkruntime.WithWaitingPods(frameworkruntime.NewWaitingPodsMap()),
		frameworkruntime.WithPodsInPreBind(frameworkruntime.NewPodsInPreBindMap()),
		frameworkruntime.WithInformerFactory(factory),
		frameworkruntime.WithSnapshotSharedLister(snapshot),
		frameworkruntime.WithMutableSnapshotLister(snapshot),
		frameworkruntime.WithSharedDRAManager(draManager),
		frameworkruntime.WithSharedCSIManager(nodevolumelimits.NewCSIManager(factory.Storage().V1().CSINodes().Lister())),
	)
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	// The ResourceClaim assume cache and the ResourceSlice tracker are fed by
	// informer event handlers, which run after the informers report synced:
	// wait until both hold every input object, or DynamicResources would see
	// "could not find ResourceClaim" for claims that exist.
	wantClaims, wantSlices := 0, 0
	var classes []string
	for _, o := range others {
		switch c := o.(type) {
		case *resourceapi.ResourceClaim:
			wantClaims++
		case *resourceapi.ResourceSlice:
			wantSlices++
		case *resourceapi.DeviceClass:
			classes = append(classes, c.Name)
		}
	}
	for i := 0; i < 5000; i++ {
		slices, _ := tracker.ListPatchedResourceSlices()
		classesKnown := true
		for _, name := range classes {
			if erCache.GetDeviceClass(v1.ResourceName("deviceclass.resource.kubernetes.io/"+name)) == nil {
				classesKnown = false
			}
		}
		if tracker.HasSynced() && len(claimCache.List(nil)) >= wantClaims && len(slices) >= wantSlices && classesKnown {
			break
		}
		time.Sleep(time.Millisecond)
	}
	fw := profiles[cfg.Profiles[0].SchedulerName]

	out := json.NewEncoder(os.Stdout)
	for _, pod := range pending {
		deletedMu.Lock()
		deleted = nil
		deletedMu.Unlock()
		res, err := schedule(ctx, fw, snapshot, pod)
		if err != nil {
			return fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		deletedMu.Lock()
		if len(deleted) > 0 {
			res.Victims = append([]string{}, deleted...)
			sort.Strings(res.Victims)
		}
		deletedMu.Unlock()
		if err := out.Encode(res); err != nil {
			return err
		}
		if res.Selected != nil {
			assumed := pod.DeepCopy()
			assumed.Spec.NodeName = *res.Selected
			pi, _ := framework.NewPodInfo(assumed)
			if err := snapshot.AssumePod(pi); err != nil {
				return err
			}
		}
	}
	return nil
}

// noNominations is a PodNominator with no nominated pods: the oracle's
// scenarios start from a clean queue, so Filter and preemption see none.
type noNominations struct{}

func (noNominations) AddNominatedPod(klog.Logger, fwk.PodInfo, *fwk.NominatingInfo) {}
func (noNominations) DeleteNominatedPodIfExists(*v1.Pod)                            {}
func (noNominations) UpdateNominatedPod(klog.Logger, *v1.Pod, fwk.PodInfo)          {}
func (noNominations) NominatedPodsForNode(string) []fwk.PodInfo                     { return nil }

func podPriority(p *v1.Pod) int32 {
	if p.Spec.Priority != nil {
		return *p.Spec.Priority
	}
	return 0
}

func schedule(ctx context.Context, fw framework.Framework, snapshot *internalcache.Snapshot, pod *v1.Pod) (*result, error) {
	res := &result{
		Pod: pod.Namespace + "/" + pod.Name, Feasible: []string{}, Filtered: map[string][]string{},
		Scores: map[string]map[string]int{}, Weights: map[string]int{}, Totals: map[string]int64{},
	}
	allNodes, err := snapshot.NodeInfos().List()
	if err != nil {
		return nil, err
	}
	state := framework.NewCycleState()
	diagnosis := framework.Diagnosis{NodeToStatus: framework.NewDefaultNodeToStatus()}
	preRes, s, unscheduledPlugins := fw.RunPreFilterPlugins(ctx, state, pod)
	var feasible []fwk.NodeInfo
	if !s.IsSuccess() {
		if !s.IsRejected() {
			return nil, s.AsError()
		}
		diagnosis.NodeToStatus.SetAbsentNodesStatus(s)
		diagnosis.PreFilterMsg = s.Message()
		for _, n := range allNodes {
			res.Filtered[n.Node().Name] = s.Reasons()
		}
	} else {
		for _, n := range allNodes {
			name := n.Node().Name
			if !preRes.AllNodes() && !preRes.NodeNames.Has(name) {
				continue
			}
			st := fw.RunFilterPluginsWithNominatedPods(ctx, state, pod, n)
			if st.IsSuccess() {
				feasible = append(feasible, n)
				res.Feasible = append(res.Feasible, name)
			} else if st.Code() == fwk.Error {
				return nil, st.AsError()
			} else {
				diagnosis.NodeToStatus.Set(name, st)
				res.Filtered[name] = st.Reasons()
			}
		}
		if !preRes.AllNodes() {
			for _, n := range allNodes {
				name := n.Node().Name
				if !preRes.NodeNames.Has(name) {
					res.Filtered[name] = []string{"(excluded by PreFilterResult)"}
				}
			}
		}
	}
	sort.Strings(res.Feasible)
	if len(feasible) == 0 {
		if !preRes.AllNodes() && s.IsSuccess() {
			diagnosis.NodeToStatus.SetAbsentNodesStatus(fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("node(s) didn't satisfy plugin(s) %v", sets.List(unscheduledPlugins))))
		}
		pfResult, pfStatus := fw.RunPostFilterPlugins(ctx, state, pod, diagnosis.NodeToStatus)
		// As schedule_one.go: the PostFilter message is kept whatever the code (a successful
		// preemption adds "preemption: found a potential placement for pod on node ...").
		diagnosis.PostFilterMsg = pfStatus.Message()
		if pfResult != nil && pfResult.NominatingInfo != nil && pfResult.NominatedNodeName != "" {
			nominated := pfResult.NominatedNodeName
			res.Nominated = &nominated
		}
		msg := (&framework.FitError{Pod: pod, NumAllNodes: len(allNodes), Diagnosis: diagnosis}).Error()
		res.Message = &msg
		return res, nil
	}
	if s := fw.RunPreScorePlugins(ctx, state, pod, feasible); !s.IsSuccess() {
		return nil, s.AsError()
	}
	scores, s2 := fw.RunScorePlugins(ctx, state, pod, feasible)
	if !s2.IsSuccess() {
		return nil, s2.AsError()
	}
	weights := map[string]int{}
	for _, pl := range fw.ListPlugins().Score.Enabled {
		weights[pl.Name] = int(pl.Weight)
	}
	var best *string
	var bestScore int64
	for i := range scores {
		ns := scores[i]
		res.Totals[ns.Name] = ns.TotalScore
		for _, ps := range ns.Scores {
			w := weights[ps.Name]
			if w == 0 {
				w = 1
			}
			if res.Scores[ps.Name] == nil {
				res.Scores[ps.Name] = map[string]int{}
			}
			res.Scores[ps.Name][ns.Name] = int(ps.Score) / w
			res.Weights[ps.Name] = w
		}
		name := ns.Name
		if best == nil || ns.TotalScore > bestScore || (ns.TotalScore == bestScore && name < *best) {
			best, bestScore = &name, ns.TotalScore
		}
	}
	res.Selected = best
	return res, nil
}
