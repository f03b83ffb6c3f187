"""Whole programs written the way public PyTorch programs are (pytorch/examples' vae, reinforcement_learning and
mnist), run with `torch` and with `lapis` and compared step for step (see program_harness.py)."""

from collections import deque, namedtuple

import numpy as np
import pytest
import torch

import lapis
from program_harness import DEVICES, load_numpy_state, parameters, run_both

# --- 2. vae: a variational autoencoder -------------------------------------------------------------------------------

def vae_model(torch, features=12, hidden=10, latent=3):
    nn, F = torch.nn, torch.nn.functional

    class VAE(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(features, hidden)
            self.fc21 = nn.Linear(hidden, latent)
            self.fc22 = nn.Linear(hidden, latent)
            self.fc3 = nn.Linear(latent, hidden)
            self.fc4 = nn.Linear(hidden, features)

        def encode(self, x):
            h1 = F.relu(self.fc1(x))
            return self.fc21(h1), self.fc22(h1)

        def reparameterize(self, mu, logvar):
            std = torch.exp(0.5 * logvar)
            eps = torch.randn_like(std)
            return mu + eps * std

        def decode(self, z):
            return torch.sigmoid(self.fc4(F.relu(self.fc3(z))))

        def forward(self, x):
            mu, logvar = self.encode(x.view(-1, features))
            return self.decode(self.reparameterize(mu, logvar)), mu, logvar

    return VAE()


def vae(torch, device, weights):
    F = torch.nn.functional
    from_data = np.random.default_rng(3)
    images = (from_data.random((20, 1, 3, 4)) > 0.6).astype(np.float32)      # binary "pixels"
    labels = from_data.integers(0, 10, 20)
    dataset = torch.utils.data.TensorDataset(torch.tensor(images[:16]), torch.tensor(labels[:16]))
    test_set = torch.utils.data.TensorDataset(torch.tensor(images[16:]), torch.tensor(labels[16:]))
    g = torch.Generator()
    g.manual_seed(7)
    train_loader = torch.utils.data.DataLoader(dataset, batch_size=6, shuffle=True, generator=g)
    test_loader = torch.utils.data.DataLoader(test_set, batch_size=4, shuffle=False)

    model = vae_model(torch).to(device)
    load_numpy_state(torch, model, weights)
    torch.manual_seed(1)                                    # the noise: drawn from here on
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)

    def loss_function(recon_x, x, mu, logvar):
        bce = F.binary_cross_entropy(recon_x, x.view(-1, 12), reduction="sum")
        kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())       # KL(N(mu, var) || N(0, 1))
        return bce + kld

    record = {"losses": [], "epoch": [], "test": [], "comparison": []}
    for _ in range(2):
        model.train()
        train_loss = 0
        for data, _ in train_loader:
            data = data.to(device)
            optimizer.zero_grad()
            recon_batch, mu, logvar = model(data)
            loss = loss_function(recon_batch, data, mu, logvar)
            loss.backward()
            train_loss += loss.item()
            optimizer.step()
            record["losses"].append(loss.item() / len(data))
        record["epoch"].append(train_loss / len(train_loader.dataset))
        model.eval()
        test_loss = 0
        with torch.no_grad():
            for i, (data, _) in enumerate(test_loader):
                data = data.to(device)
                recon_batch, mu, logvar = model(data)
                test_loss += loss_function(recon_batch, data, mu, logvar).item()
                if i == 0:                                  # originals above their reconstructions
                    n = min(data.size(0), 3)
                    comparison = torch.cat([data[:n], recon_batch.view(data.size(0), 1, 3, 4)[:n]])
                    record["comparison"].append(comparison.cpu().numpy())
        record["test"].append(test_loss / len(test_loader.dataset))
    with torch.no_grad():
        sample = torch.randn(5, 3).to(device)
        record["sample"] = model.decode(sample).cpu().view(5, 1, 3, 4).numpy()
    record["params"] = parameters(model)
    return record


@pytest.mark.parametrize("device", DEVICES)
def test_vae_trains_as_torch_s(device, monkeypatch):
    """Encoder and decoder MLPs, the reparameterization mu + eps * std with randn_like, binary cross-entropy summed
    plus the KL term, Adam; a shuffled DataLoader with a seeded generator, evaluation under no_grad, samples decoded
    from randn."""
    run_both(vae, vae_model, device, monkeypatch)


# --- 3. reinforcement_learning: actor-critic on a toy environment -----------------------------------------------------

class Corridor:
    """A deterministic toy environment: a walker on squares 0 .. 6 starts on 3; action 1 steps right, 0 left. Each
    step earns the new square's number / 6; the episode ends on either end square or after 8 steps. The state is four
    numbers (CartPole's count): position, its mirror, time, and a constant."""

    def reset(self):
        self.square, self.t = 3, 0
        return self.state()

    def state(self):
        return np.array([self.square / 6, 1 - self.square / 6, self.t / 8, 1.0])

    def step(self, action):
        self.square += 1 if action == 1 else -1
        self.t += 1
        done = self.square in (0, 6) or self.t == 8
        return self.state(), self.square / 6, done, {}


def policy_model(torch, hidden=16):
    nn, F = torch.nn, torch.nn.functional

    class Policy(nn.Module):
        """The actor and the critic in one: a shared layer, then action probabilities and a state value."""

        def __init__(self):
            super().__init__()
            self.affine1 = nn.Linear(4, hidden)
            self.action_head = nn.Linear(hidden, 2)
            self.value_head = nn.Linear(hidden, 1)
            self.saved_actions, self.rewards = [], []

        def forward(self, x):
            x = F.relu(self.affine1(x))
            return F.softmax(self.action_head(x), dim=-1), self.value_head(x)

    return Policy()


SavedAction = namedtuple("SavedAction", ["log_prob", "value"])


def actor_critic(torch, device, weights):
    F = torch.nn.functional
    Categorical = torch.distributions.Categorical
    gamma, eps = 0.9, np.finfo(np.float32).eps.item()
    model = policy_model(torch).to(device)
    load_numpy_state(torch, model, weights)
    torch.manual_seed(543)                                  # the actions: drawn from here on
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-2)

    def select_action(state):
        state = torch.from_numpy(state).float().to(device)
        probs, state_value = model(state)
        m = Categorical(probs)
        action = m.sample()
        model.saved_actions.append(SavedAction(m.log_prob(action), state_value))
        return action.item()

    def finish_episode():
        R, policy_losses, value_losses, returns = 0, [], [], []
        for r in model.rewards[::-1]:
            R = r + gamma * R
            returns.insert(0, R)
        returns = torch.tensor(returns, device=device)
        returns = (returns - returns.mean()) / (returns.std() + eps)
        for (log_prob, value), R in zip(model.saved_actions, returns, strict=True):
            advantage = R - value.item()
            policy_losses.append(-log_prob * advantage)
            value_losses.append(F.smooth_l1_loss(value, torch.tensor([R], device=device)))
        optimizer.zero_grad()
        loss = torch.stack(policy_losses).sum() + torch.stack(value_losses).sum()
        loss.backward()
        optimizer.step()
        del model.rewards[:]
        del model.saved_actions[:]
        return loss.item()

    env, running_reward = Corridor(), 0.0
    record = {"actions": [], "losses": [], "running": []}
    for _ in range(4):
        state, ep_reward = env.reset(), 0.0
        for _ in range(1, 10):
            action = select_action(state)
            record["actions"].append(action)
            state, reward, done, _ = env.step(action)
            model.rewards.append(reward)
            ep_reward += reward
            if done:
                break
        running_reward = 0.05 * ep_reward + (1 - 0.05) * running_reward
        record["losses"].append(finish_episode())
        record["running"].append(running_reward)
    record["params"] = parameters(model)
    return record


@pytest.mark.parametrize("device", DEVICES)
def test_actor_critic_trains_as_torch_s(device, monkeypatch):
    """A policy and a value head, Categorical(probs) sampled with its log_prob saved, discounted returns normalised by
    (r - mean) / (std + eps), iterated as 0-d tensors into torch.tensor([R]) targets of smooth_l1_loss, losses stacked
    and summed, Adam; four episodes of a deterministic corridor."""
    ours = run_both(actor_critic, policy_model, device, monkeypatch)
    assert set(ours["actions"]) == {0, 1}


def reinforce_model(torch, hidden=16):
    nn, F = torch.nn, torch.nn.functional

    class Policy(nn.Module):
        def __init__(self):
            super().__init__()
            self.affine1 = nn.Linear(4, hidden)
            self.dropout = nn.Dropout(p=0.6)
            self.affine2 = nn.Linear(hidden, 2)
            self.saved_log_probs, self.rewards = [], []

        def forward(self, x):
            x = F.relu(self.dropout(self.affine1(x)))
            return F.softmax(self.affine2(x), dim=1)

    return Policy()


def reinforce(torch, device, weights):
    gamma, eps = 0.9, np.finfo(np.float32).eps.item()
    policy = reinforce_model(torch).to(device)
    load_numpy_state(torch, policy, weights)
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
    torch.manual_seed(543)                                  # dropout and actions: drawn from here on

    def select_action(state):
        state = torch.from_numpy(state).float().unsqueeze(0).to(device)          # a batch of one
        m = torch.distributions.Categorical(policy(state))
        action = m.sample()
        policy.saved_log_probs.append(m.log_prob(action))
        return action.item()

    def finish_episode():
        R, policy_loss, returns = 0, [], deque()
        for r in policy.rewards[::-1]:
            R = r + gamma * R
            returns.appendleft(R)
        returns = torch.tensor(returns).to(device)
        returns = (returns - returns.mean()) / (returns.std() + eps)
        for log_prob, R in zip(policy.saved_log_probs, returns, strict=True):
            policy_loss.append(-log_prob * R)
        optimizer.zero_grad()
        policy_loss = torch.cat(policy_loss).sum()
        policy_loss.backward()
        optimizer.step()
        del policy.rewards[:]
        del policy.saved_log_probs[:]
        return policy_loss.item()

    env, record = Corridor(), {"actions": [], "losses": []}
    for _ in range(3):
        state = env.reset()
        for _ in range(1, 10):
            action = select_action(state)
            record["actions"].append(action)
            state, reward, done, _ = env.step(action)
            policy.rewards.append(reward)
            if done:
                break
        record["losses"].append(finish_episode())
    record["params"] = parameters(policy)
    return record


@pytest.mark.parametrize("device", DEVICES)
def test_reinforce_trains_as_torch_s(device, monkeypatch):
    """reinforce.py beside it: dropout in the policy, a batch of one state (unsqueeze(0)), returns built in a deque,
    the (1,)-shaped terms joined by torch.cat."""
    run_both(reinforce, reinforce_model, device, monkeypatch)


# --- 5. mnist: a CNN through a DataLoader ----------------------------------------------------------------------------

def mnist_model(torch):
    nn, F = torch.nn, torch.nn.functional

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 4, 3, 1)
            self.conv2 = nn.Conv2d(4, 8, 3, 1)
            self.dropout1 = nn.Dropout(0.25)
            self.dropout2 = nn.Dropout(0.5)
            self.fc1 = nn.Linear(32, 16)
            self.fc2 = nn.Linear(16, 3)

        def forward(self, x):
            x = F.relu(self.conv1(x))
            x = F.relu(self.conv2(x))
            x = F.max_pool2d(x, 2)
            x = self.dropout1(x)
            x = torch.flatten(x, 1)
            x = self.dropout2(F.relu(self.fc1(x)))
            return F.log_softmax(self.fc2(x), dim=1)

    return Net()


def mnist(torch, device, weights):
    F = torch.nn.functional
    from_data = np.random.default_rng(5)
    images = from_data.random((30, 1, 8, 8)).astype(np.float32)                  # "pixels" in [0, 1)
    labels = (images[:, 0, 2:6, 2:6].mean((1, 2)) > 0.5).astype(np.int64) + (images[:, 0, 0].mean(1) > 0.55)
    images = (torch.from_numpy(images) - 0.1307) / 0.3081                        # transforms.Normalize's job
    g = torch.Generator()
    g.manual_seed(1)
    train_kwargs, test_kwargs = {"batch_size": 8, "shuffle": True, "generator": g}, {"batch_size": 6}
    if device != "cpu":
        accel_kwargs = {"num_workers": 1, "persistent_workers": True, "pin_memory": True}
        train_kwargs.update(accel_kwargs)
        test_kwargs.update(accel_kwargs)
    train_loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(images[:20], torch.from_numpy(labels[:20])), **train_kwargs)
    test_loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(images[20:], torch.from_numpy(labels[20:])), **test_kwargs)

    model = mnist_model(torch).to(device)
    load_numpy_state(torch, model, weights)
    torch.manual_seed(1)                                    # dropout's masks: drawn from here on
    optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)

    record = {"losses": [], "log": [], "test_loss": [], "correct": [], "lr": []}
    for epoch in range(1, 3):
        model.train()
        for batch_idx, (data, target) in enumerate(train_loader):
            data, target = data.to(device), target.to(device)
            optimizer.zero_grad()
            output = model(data)
            loss = F.nll_loss(output, target)
            loss.backward()
            optimizer.step()
            record["losses"].append(loss.item())
            if batch_idx % 2 == 0:                          # the example's log line
                record["log"].append(f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_loader.dataset)} "
                                     f"({100. * batch_idx / len(train_loader):.0f}%)]\tLoss: {loss.item():.3f}")
        model.eval()
        test_loss, correct = 0, 0
        with torch.no_grad():
            for data, target in test_loader:
                data, target = data.to(device), target.to(device)
                output = model(data)
                test_loss += F.nll_loss(output, target, reduction="sum").item()
                pred = output.argmax(dim=1, keepdim=True)
                correct += pred.eq(target.view_as(pred)).sum().item()
        record["test_loss"].append(test_loss / len(test_loader.dataset))
        record["correct"].append(correct)
        scheduler.step()
        record["lr"].append(scheduler.get_last_lr()[0])
    record["params"] = parameters(model)
    return record


@pytest.mark.parametrize("device", DEVICES)
def test_mnist_cnn_trains_as_torch_s(device, monkeypatch):
    """Conv2d, ReLU, max_pool2d, Dropout (masks in training, none in evaluation), flatten, Linear, log_softmax and
    nll_loss, trained with Adadelta and StepLR through a DataLoader over a TensorDataset shuffled by a seeded generator
    (with the example's accelerator options on a GPU: workers, pinned memory); model.train() / model.eval(), and an
    evaluation pass under no_grad counting argmax hits with eq and view_as."""
    run_both(mnist, mnist_model, device, monkeypatch)


@pytest.mark.parametrize("device", DEVICES)
def test_relu_and_dropout_act_in_place_when_told_as_torch_s(device):
    """F.relu(x, inplace=True) and nn.Dropout(p, inplace=True) write into x and return it (in evaluation dropout
    returns x as it is; p=1 zeroes it); nn.Dropout's repr and its check of p are torch's."""
    values = np.linspace(-1, 1, 6, dtype=np.float32)
    for lib, dev in ((lapis, device), (torch, "cpu")):
        x = lib.tensor(values, device=dev)
        assert lib.nn.functional.relu(x, inplace=True) is x
        np.testing.assert_array_equal(x.cpu().numpy(), np.maximum(values, 0))
        drop = lib.nn.Dropout(1.0, inplace=True)
        assert repr(drop) == "Dropout(p=1.0, inplace=True)"
        assert drop.eval()(x) is x and drop.train()(x) is x
        np.testing.assert_array_equal(x.cpu().numpy(), np.zeros(6, np.float32))
        with pytest.raises(ValueError, match="between 0 and 1, but got 1.5"):
            lib.nn.Dropout(1.5)
    lapis.manual_seed(0)
    x = lapis.ones(1000, device=device)
    assert lapis.nn.functional.dropout(x, 0.25, inplace=True) is x
    kept = x.cpu().numpy()
    assert set(np.unique(kept)) == {0.0, np.float32(1 / 0.75)} and abs((kept == 0).mean() - 0.25) < 0.05
