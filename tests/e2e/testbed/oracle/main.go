// Command oracle runs upstream kube-scheduler's own framework and default
// plugins (k8s.io/kubernetes v1.37.2, pinned by this module) on a cluster
// read from a JSON file, and prints what each pending Pod would get: feasible
// nodes, filter reasons, every plugin's normalized score, totals, the
// FailedScheduling message. bench/parity compares it with py-scheduler explain.
//
// Input (stdin): {"objects": [<Kubernetes objects with apiVersion/kind>]}.
// Pods with spec.nodeName are bound; the others are scheduled in queue order
// (priority, then creationTimestamp), one scheduling cycle each, as
// schedule_one.go's schedulingCycle does it:
//   - a Pod whose status.nominatedNodeName is set tries that node alone first
//     (evaluateNominatedNode); Filter sees the pending Pods nominated to a node
//     (RunFilterPluginsWithNominatedPods, here through a plain PodNominator
//     seeded with every pending Pod's status.nominatedNodeName);
//   - a placed Pod (ties: smallest node name) is assumed on the snapshot and
//     runs the Reserve plugins (VolumeBinding assumes its PVs/PVCs,
//     DynamicResources records its in-flight allocation), so every later Pod
//     sees it; a Reserve failure runs Unreserve and forgets the Pod; its
//     nomination is dropped. PreBind/Bind are not run (no API writes);
//   - a Pod that fits nowhere runs PostFilter (DefaultPreemption, synchronous):
//     the deleted victims leave the snapshot, the Pod is nominated to the chosen
//     node and lower-priority Pods nominated there lose their nomination (as the
//     preemption executor's clearNominatedNodeName); an empty nomination clears
//     the Pod's own.
//
// Output: one JSON object per pending Pod (JSON Lines).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/watch"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clientscheme "k8s.io/client-go/kubernetes/scheme"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	"k8s.io/dynamic-resource-allocation/deviceclass/extendedresourcecache"
	resourceslicetracker "k8s.io/dynamic-resource-allocation/resourceslice/tracker"
	"k8s.io/klog/v2"
	configv1 "k8s.io/kube-scheduler/config/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/features"
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
	// Error is the scheduling error (a plugin returned Error, not a
	// rejection): the FailedScheduling message of that cycle.
	Error *string `json:"error,omitempty"`
	// Reserve is the message of a failed Reserve (the Pod was selected, then
	// unreserved and forgotten).
	Reserve *string `json:"reserve,omitempty"`
	// Allocations are the AllocationResults DynamicResources' Reserve made for
	// the Pod's claims (namespace/name -> result; upstream's pending
	// allocations, what PreBind would write into status.allocation).
	Allocations map[string]*resourceapi.AllocationResult `json:"allocations,omitempty"`
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
			if o.Status.Phase == v1.PodSucceeded || o.Status.Phase == v1.PodFailed {
				// kube-scheduler's Pod informer selects status.phase!=Succeeded,Failed
				// (scheduler.go newPodInformer): terminal Pods are invisible to it.
				continue
			}
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
	// ORACLE_FEATURE_GATES (kube-scheduler's --feature-gates syntax, e.g.
	// "GenericWorkload=true"): set before the configuration is defaulted, so the
	// default profile gains what default_plugins.go's applyFeatureGates adds.
	// Unset: upstream's defaults, as before.
	if gates := os.Getenv("ORACLE_FEATURE_GATES"); gates != "" {
		if err := utilfeature.DefaultMutableFeatureGate.Set(gates); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logger := klog.FromContext(ctx)
	// The fake clientset's watchers buffer DefaultChanSize events and panic
	// when full; a preemption patches and deletes every victim in parallel
	// (two events each), faster than the informers drain them.
	watch.DefaultChanSize = 100000
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
	// As pkg/scheduler/scheduler.go with v1.37.2's default gates (DRADeviceTaintRules,
	// DRAConsumableCapacity): DeviceTaintRules patch the slices the allocator sees.
	tracker, err := resourceslicetracker.StartTracker(ctx, resourceslicetracker.Options{
		EnableDeviceTaintRules:   true,
		EnableConsumableCapacity: true,
		SliceInformer:            factory.Resource().V1().ResourceSlices(),
		TaintInformer:            factory.Resource().V1().DeviceTaintRules(),
		KubeClient:               client,
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
	// With GenericWorkload the live scheduler's snapshot holds the PodGroups too (the cache's
	// podGroupStates): DefaultPreemption reads a victim's PodGroup priority from it (GetPodPriority).
	var podGroups []*schedulingv1beta1.PodGroup
	if utilfeature.DefaultFeatureGate.Enabled(features.GenericWorkload) {
		for _, o := range others {
			if pg, ok := o.(*schedulingv1beta1.PodGroup); ok {
				podGroups = append(podGroups, pg)
			}
		}
	}
	snapshot := internalcache.NewTestSnapshotWithPodGroups(bound, nodes, podGroups)
	nom := newNominator()
	for _, p := range pending {
		if p.Status.NominatedNodeName != "" {
			pi, _ := framework.NewPodInfo(p)
			nom.add(pi, p.Status.NominatedNodeName)
		}
	}
	// Events (Preempted, one per victim) are discarded; the fake recorder's
	// channel is drained so that a preemption with many victims never blocks.
	fakeRecorder := events.NewFakeRecorder(100)
	go func() {
		for range fakeRecorder.Events {
		}
	}()
	recorder := func(string) events.EventRecorderLogger { return fakeRecorder }
	profiles, err := profile.NewMap(ctx, cfg.Profiles, plugins.NewInTreeRegistry(), recorder,
		frameworkruntime.WithClientSet(client),
		frameworkruntime.WithPodNominator(nom),
		frameworkruntime.WithWaitingPods(frameworkruntime.NewWaitingPodsMap()),
		frameworkruntime.WithPodsInPreBind(frameworkruntime.NewPodsInPreBindMap()),
		frameworkruntime.WithInformerFactory(factory),
		frameworkruntime.WithSnapshotSharedLister(snapshot),
		frameworkruntime.WithMutableSnapshotLister(snapshot),
		frameworkruntime.WithSharedDRAManager(draManager),
		frameworkruntime.WithSharedCSIManager(nodevolumelimits.NewCSIManager(factory.Storage().V1().CSINodes().Lister())),
		frameworkruntime.WithPodGroupManager(podGroupManager(ctx, others, pending)),
	)
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	// VolumeBinding's PV / PVC caches read the informers' stores directly
	// (passive_assume_cache.go), so a synced factory is enough for them.
	factory.WaitForCacheSync(ctx.Done())
	// The ResourceClaim assume cache and the ResourceSlice tracker are fed by
	// informer event handlers, which run after the informers report synced:
	// wait until both hold every input object, or DynamicResources would see
	// "could not find ResourceClaim" for claims that exist.
	// The allocated-devices index of the claim tracker is fed by another
	// handler, on the assume cache: wait until it holds every device that the
	// input claims' status.allocation names too.
	wantClaims, wantSlices, wantShares := 0, 0, 0
	wantDevices := sets.New[string]()
	var classes []string
	for _, o := range others {
		switch c := o.(type) {
		case *resourceapi.ResourceClaim:
			wantClaims++
			if c.Status.Allocation != nil {
				for _, r := range c.Status.Allocation.Devices.Results {
					// Admin-access results and shares of a multi-allocatable device are not
					// dedicated devices: the DRA manager does not list them as allocated.
					if r.AdminAccess != nil && *r.AdminAccess {
						continue
					}
					// Shares are in the gathered state's shared-device index instead
					// (with their consumed capacity): wait for those as well, or the
					// allocator can miss a share's consumption now and then.
					if r.ShareID != nil {
						wantShares++
						continue
					}
					wantDevices.Insert(r.Driver + "/" + r.Pool + "/" + r.Device)
				}
			}
		case *resourceapi.ResourceSlice:
			wantSlices++
		case *resourceapi.DeviceClass:
			classes = append(classes, c.Name)
		}
	}
	for deadline := time.Now().Add(60 * time.Second); ; {
		slices, _ := tracker.ListPatchedResourceSlices()
		classesKnown := true
		for _, name := range classes {
			if erCache.GetDeviceClass(v1.ResourceName("deviceclass.resource.kubernetes.io/"+name)) == nil {
				classesKnown = false
			}
		}
		allocated, err := draManager.ResourceClaims().ListAllAllocatedDevices()
		shares := 0
		if gathered, gerr := draManager.ResourceClaims().GatherAllocatedState(); gerr == nil && gathered != nil {
			shares = gathered.AllocatedSharedDeviceIDs.Len()
		} else if err == nil {
			err = gerr
		}
		if tracker.HasSynced() && len(claimCache.List(nil)) >= wantClaims && len(slices) >= wantSlices && classesKnown &&
			err == nil && allocated.Len() >= wantDevices.Len() && shares >= wantShares {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("DRA caches not in sync after 60s (claims %d/%d, slices %d/%d, allocated devices %d/%d, shares %d/%d)",
				len(claimCache.List(nil)), wantClaims, len(slices), wantSlices, allocated.Len(), wantDevices.Len(), shares, wantShares)
		}
		time.Sleep(time.Millisecond)
	}
	fw := profiles[cfg.Profiles[0].SchedulerName]

	out := json.NewEncoder(os.Stdout)
	podLister := factory.Core().V1().Pods().Lister()
	for _, pod := range pending {
		// The preemptor is re-read through the Pod lister by DefaultPreemption:
		// use the informer's copy, which carries any nomination cleared by an
		// earlier preemption.
		if cur, err := podLister.Pods(pod.Namespace).Get(pod.Name); err == nil {
			pod = cur
		}
		deletedMu.Lock()
		deleted = nil
		deletedMu.Unlock()
		res, state, pfNomination, err := schedule(ctx, fw, snapshot, pod)
		if err != nil {
			return fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		deletedMu.Lock()
		victims := append([]string{}, deleted...)
		deletedMu.Unlock()
		if len(victims) > 0 {
			sort.Strings(victims)
			res.Victims = victims
		}
		switch {
		case res.Selected != nil:
			assumed := pod.DeepCopy()
			assumed.Spec.NodeName = *res.Selected
			pi, _ := framework.NewPodInfo(assumed)
			if err := snapshot.AssumePod(pi); err != nil {
				return err
			}
			if st := fw.RunReservePluginsReserve(ctx, state, assumed, *res.Selected); !st.IsSuccess() {
				fw.RunReservePluginsUnreserve(ctx, state, assumed, *res.Selected)
				if err := snapshot.ForgetPod(logger, assumed); err != nil {
					return err
				}
				msg := st.Message()
				res.Reserve = &msg
			} else {
				res.Allocations = pendingAllocations(draManager, others, pod)
			}
			nom.delete(pod.UID)
		case res.Error != nil:
			nom.delete(pod.UID)
		case pfNomination != nil && pfNomination.Mode() == fwk.ModeOverride:
			nom.delete(pod.UID)
			if n := pfNomination.NominatedNodeName; n != "" {
				if err := evict(ctx, snapshot, victims); err != nil {
					return err
				}
				cleared := nom.clearLowerPriority(n, podPriority(pod))
				if err := waitNominationsCleared(ctx, podLister, cleared); err != nil {
					return err
				}
				pi, _ := framework.NewPodInfo(pod)
				nom.add(pi, n)
			}
		}
		if err := out.Encode(res); err != nil {
			return err
		}
	}
	return nil
}

// evict removes deleted preemption victims from their NodeInfo in the snapshot
// (the cache drops a deleted Pod), in namespace/name order. Nothing upstream
// reads victims back through the Pod informer, so its view is not waited for
// (the fake clientset occasionally drops a watch event under a burst of
// parallel deletions).
// Snapshot.RemovePod needs a mutation session, whose NodeInfo clones lose the
// image spread (ImageStateSummary.Snapshot drops Nodes), so the NodeInfo is
// changed in place; the snapshot-wide lists keep the node (harmless: it is
// only iterated for its Pods) and usedPVCRefCounts keep the victim's claims
// (the generator gives Pods with PVCs a priority no pending Pod exceeds, so
// they are never victims).
func evict(ctx context.Context, snapshot *internalcache.Snapshot, victims []string) error {
	logger := klog.FromContext(ctx)
	for _, key := range victims {
		ns, name, _ := strings.Cut(key, "/")
		var victim *v1.Pod
		for _, ni := range mustList(snapshot) {
			for _, p := range ni.GetPods() {
				if p.GetPod().Namespace == ns && p.GetPod().Name == name {
					victim = p.GetPod()
				}
			}
		}
		if victim == nil {
			return fmt.Errorf("victim %s not in the snapshot", key)
		}
		ni, err := snapshot.Get(victim.Spec.NodeName)
		if err != nil {
			return err
		}
		if err := ni.(*framework.NodeInfo).RemovePod(logger, victim); err != nil {
			return err
		}
	}
	return nil
}

func mustList(snapshot *internalcache.Snapshot) []fwk.NodeInfo {
	l, _ := snapshot.NodeInfos().List()
	return l
}

// waitNominationsCleared waits until the informer shows the nominations that
// the preemption executor cleared through the API.
func waitNominationsCleared(ctx context.Context, lister corelisters.PodLister, pods []*v1.Pod) error {
	for _, p := range pods {
		for deadline := time.Now().Add(60 * time.Second); ; {
			cur, err := lister.Pods(p.Namespace).Get(p.Name)
			if err != nil || cur.Status.NominatedNodeName == "" {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("nomination of %s/%s not cleared after 60s", p.Namespace, p.Name)
			}
			time.Sleep(time.Millisecond)
		}
	}
	return nil
}

// nominator is the scheduling queue's PodNominator reduced to a map: pending
// Pods by nominated node, in nomination order.
type nominator struct {
	mu     sync.RWMutex
	byNode map[string][]fwk.PodInfo
	nodeOf map[types.UID]string
}

func newNominator() *nominator {
	return &nominator{byNode: map[string][]fwk.PodInfo{}, nodeOf: map[types.UID]string{}}
}

func (n *nominator) add(pi fwk.PodInfo, node string) {
	n.delete(pi.GetPod().UID)
	n.mu.Lock()
	defer n.mu.Unlock()
	n.nodeOf[pi.GetPod().UID] = node
	n.byNode[node] = append(n.byNode[node], pi)
}

func (n *nominator) delete(uid types.UID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	node, ok := n.nodeOf[uid]
	if !ok {
		return
	}
	delete(n.nodeOf, uid)
	var keep []fwk.PodInfo
	for _, pi := range n.byNode[node] {
		if pi.GetPod().UID != uid {
			keep = append(keep, pi)
		}
	}
	if len(keep) == 0 {
		delete(n.byNode, node)
	} else {
		n.byNode[node] = keep
	}
}

// clearLowerPriority drops the nominations to node of Pods with a priority
// below prio (getLowerPriorityNominatedPods + clearNominatedNodeName) and
// returns those Pods.
func (n *nominator) clearLowerPriority(node string, prio int32) []*v1.Pod {
	n.mu.RLock()
	var lower []*v1.Pod
	for _, pi := range n.byNode[node] {
		if podPriority(pi.GetPod()) < prio {
			lower = append(lower, pi.GetPod())
		}
	}
	n.mu.RUnlock()
	for _, p := range lower {
		n.delete(p.UID)
	}
	return lower
}

func (n *nominator) AddNominatedPod(_ klog.Logger, pi fwk.PodInfo, ni *fwk.NominatingInfo) {
	node := pi.GetPod().Status.NominatedNodeName
	if ni.Mode() == fwk.ModeOverride {
		node = ni.NominatedNodeName
	}
	if node == "" {
		n.delete(pi.GetPod().UID)
		return
	}
	n.add(pi, node)
}
func (n *nominator) DeleteNominatedPodIfExists(p *v1.Pod) { n.delete(p.UID) }
func (n *nominator) UpdateNominatedPod(_ klog.Logger, old *v1.Pod, pi fwk.PodInfo) {
	n.mu.RLock()
	node, ok := n.nodeOf[old.UID]
	n.mu.RUnlock()
	if ok {
		n.add(pi, node)
	}
}
func (n *nominator) NominatedPodsForNode(node string) []fwk.PodInfo {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return append([]fwk.PodInfo(nil), n.byNode[node]...)
}

func podPriority(p *v1.Pod) int32 {
	if p.Spec.Priority != nil {
		return *p.Spec.Priority
	}
	return 0
}

// schedule runs one cycle (schedulePod) for pod and returns what it decided,
// the cycle state (for Reserve) and PostFilter's nominating info. A plugin
// Error ends the cycle with res.Error set, as schedulingCycle does.
func schedule(ctx context.Context, fw framework.Framework, snapshot *internalcache.Snapshot, pod *v1.Pod) (*result, fwk.CycleState, *fwk.NominatingInfo, error) {
	res := &result{
		Pod: pod.Namespace + "/" + pod.Name, Feasible: []string{}, Filtered: map[string][]string{},
		Scores: map[string]map[string]int{}, Weights: map[string]int{}, Totals: map[string]int64{},
	}
	fail := func(err error) (*result, fwk.CycleState, *fwk.NominatingInfo, error) {
		msg := err.Error()
		res.Error = &msg
		res.Feasible, res.Filtered = []string{}, map[string][]string{}
		res.Scores, res.Totals = map[string]map[string]int{}, map[string]int64{}
		return res, nil, nil, nil
	}
	allNodes, err := snapshot.NodeInfos().List()
	if err != nil {
		return nil, nil, nil, err
	}
	state := framework.NewCycleState()
	diagnosis := framework.Diagnosis{NodeToStatus: framework.NewDefaultNodeToStatus()}
	preRes, s, unscheduledPlugins := fw.RunPreFilterPlugins(ctx, state, pod)
	var feasible []fwk.NodeInfo
	if !s.IsSuccess() {
		if !s.IsRejected() {
			return fail(s.AsError())
		}
		diagnosis.NodeToStatus.SetAbsentNodesStatus(s)
		diagnosis.PreFilterMsg = s.Message()
		for _, n := range allNodes {
			res.Filtered[n.Node().Name] = s.Reasons()
		}
	} else {
		// evaluateNominatedNode: the nominated node alone first (PreFilterResult
		// not applied); if it passes, no other node is filtered.
		if nnn := pod.Status.NominatedNodeName; nnn != "" {
			if n, err := snapshot.Get(nnn); err == nil {
				st := fw.RunFilterPluginsWithNominatedPods(ctx, state, pod, n)
				if st.IsSuccess() {
					feasible = append(feasible, n)
					res.Feasible = append(res.Feasible, nnn)
				} else if st.Code() == fwk.Error {
					return fail(st.AsError())
				} else {
					diagnosis.NodeToStatus.Set(nnn, st)
					res.Filtered[nnn] = st.Reasons()
				}
			}
		}
		if len(feasible) == 0 {
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
					return fail(st.AsError())
				} else {
					diagnosis.NodeToStatus.Set(name, st)
					res.Filtered[name] = st.Reasons()
				}
			}
			if !preRes.AllNodes() {
				for _, n := range allNodes {
					name := n.Node().Name
					if _, rejected := res.Filtered[name]; !preRes.NodeNames.Has(name) && !rejected {
						res.Filtered[name] = []string{"(excluded by PreFilterResult)"}
					}
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
		var nominating *fwk.NominatingInfo
		if pfResult != nil {
			nominating = pfResult.NominatingInfo
		}
		if nominating != nil && nominating.NominatedNodeName != "" {
			nominated := nominating.NominatedNodeName
			res.Nominated = &nominated
		}
		msg := (&framework.FitError{Pod: pod, NumAllNodes: len(allNodes), Diagnosis: diagnosis}).Error()
		res.Message = &msg
		return res, state, nominating, nil
	}
	if s := fw.RunPreScorePlugins(ctx, state, pod, feasible); !s.IsSuccess() {
		return fail(s.AsError())
	}
	scores, s2 := fw.RunScorePlugins(ctx, state, pod, feasible)
	if !s2.IsSuccess() {
		return fail(s2.AsError())
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
	return res, state, nil, nil
}

// pendingAllocations returns the allocations DynamicResources' Reserve left
// pending for the claims the Pod references by name (nil when none).
func pendingAllocations(dm fwk.SharedDRAManager, others []runtime.Object, pod *v1.Pod) map[string]*resourceapi.AllocationResult {
	var out map[string]*resourceapi.AllocationResult
	for _, rc := range pod.Spec.ResourceClaims {
		if rc.ResourceClaimName == nil {
			continue
		}
		for _, o := range others {
			c, ok := o.(*resourceapi.ResourceClaim)
			if !ok || c.Namespace != pod.Namespace || c.Name != *rc.ResourceClaimName {
				continue
			}
			if a := dm.ResourceClaims().GetPendingAllocation(c.UID); a != nil {
				if out == nil {
					out = map[string]*resourceapi.AllocationResult{}
				}
				out[c.Namespace+"/"+c.Name] = a
			}
		}
	}
	return out
}

// podGroupManager is what kube-scheduler hands plugins as their PodGroupManager
// (scheduler.go: the scheduler cache) when GenericWorkload is on: the input's
// PodGroups and pending members. Nil with the gate off, as upstream's default.
func podGroupManager(ctx context.Context, others []runtime.Object, pending []*v1.Pod) fwk.PodGroupManager {
	if !utilfeature.DefaultFeatureGate.Enabled(features.GenericWorkload) {
		return nil
	}
	c := internalcache.New(ctx, nil, true, false)
	for _, o := range others {
		if pg, ok := o.(*schedulingv1beta1.PodGroup); ok {
			c.AddPodGroup(pg)
		}
	}
	for _, p := range pending {
		c.AddPodGroupMember(p)
	}
	return c
}
